-- When a session lost its lobby seat (seat -1). Retention deletes a freed
-- session a window after it was freed, not after it was created: a player
-- who waited long in a lobby must not lose the session at once.
ALTER TABLE sessions ADD COLUMN freed_at TIMESTAMPTZ;
