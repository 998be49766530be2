//! Property tests of the game core (filled in below).
