//! The codec of every generated service and client: prost's, except that a
//! message that cannot be decoded is `INVALID_ARGUMENT` (the sender's
//! mistake, not to be retried), where prost's codec says `INTERNAL`, and
//! that each call's buffers start at [`BUFFER_BYTES`], not tonic's 8 KiB.

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::{Code, Status};
use tonic_prost::{ProstCodec, ProstDecoder};

/// Where each call's encode and decode buffers start (tonic allocates
/// them for every call, and grows them by this much for a larger
/// message). Every game message but a replay fits: an `Act`'s reply, the
/// largest frequent one, is a game state of a few hundred bytes. 8 KiB,
/// tonic's default, is past what the allocator keeps in its per-thread
/// cache, so every call paid a slow allocation and free for each buffer.
pub const BUFFER_BYTES: usize = 1024;

/// Tonic's default: a streamed reply yields after this many bytes.
const YIELD_THRESHOLD: usize = 32 * 1024;

fn buffers() -> BufferSettings {
    BufferSettings::new(BUFFER_BYTES, YIELD_THRESHOLD)
}

/// [`ProstCodec`], with undecodable messages refused as invalid.
#[derive(Debug, Clone)]
pub struct StrictCodec<T, U> {
    _pd: PhantomData<(T, U)>,
}

impl<T, U> Default for StrictCodec<T, U> {
    fn default() -> Self {
        StrictCodec { _pd: PhantomData }
    }
}

impl<T, U> Codec for StrictCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = <ProstCodec<T, U> as Codec>::Encoder;
    type Decoder = StrictDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(buffers())
    }

    fn decoder(&mut self) -> Self::Decoder {
        StrictDecoder(ProstCodec::<T, U>::raw_decoder(buffers()))
    }
}

/// prost's decoder, its decode errors turned into `INVALID_ARGUMENT`.
#[derive(Debug)]
pub struct StrictDecoder<U>(ProstDecoder<U>);

impl<U: Message + Default> Decoder for StrictDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|status| match status.code() {
            Code::Internal => Status::invalid_argument(format!(
                "the message is not valid protobuf for this call ({}); \
                 encode it from proto/borbaman.proto",
                status.message()
            )),
            _ => status,
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
