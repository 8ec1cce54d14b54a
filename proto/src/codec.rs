//! The codec every generated service and client uses: prost's, with smaller first buffers.
//!
//! tonic gives each end of each stream an encode buffer and a decode buffer of
//! `buffer_size` bytes up front (8 KiB by default). A pull agent's session is one long-lived
//! stream, and a session that reaches its owner through another replica has three stream ends
//! on the replicas, so the default buffers alone were about 48 KiB of replica memory per
//! forwarded session (`loadtest agents`: 83 KiB per session in all). Messages here are mostly
//! small (pings, heartbeats, votes, jobs); a larger one grows its buffer as it needs, and the
//! yield threshold (how much is encoded before the stream hands a frame on) stays tonic's.

use std::marker::PhantomData;

use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstDecoder, ProstEncoder};

/// The first capacity of each stream end's encode and decode buffer.
pub const FIRST_BUFFER_BYTES: usize = 1024;
/// tonic's default: the bytes encoded before a stream yields a frame.
const YIELD_THRESHOLD_BYTES: usize = 32 * 1024;

/// prost's codec with [`FIRST_BUFFER_BYTES`] buffers (named by `build.rs` as the generated
/// code's codec).
#[derive(Debug, Clone, Copy)]
pub struct StarlingCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for StarlingCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

fn settings() -> BufferSettings {
    BufferSettings::new(FIRST_BUFFER_BYTES, YIELD_THRESHOLD_BYTES)
}

impl<T, U> Codec for StarlingCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(settings())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::codec::{Decoder as _, Encoder as _};

    #[test]
    fn the_buffers_start_small_and_the_yield_threshold_is_tonics() {
        let mut codec = StarlingCodec::<crate::HeartbeatRequest, crate::HeartbeatAck>::default();
        let expected = format!("{:?}", settings());
        assert!(expected.contains(&format!("buffer_size: {FIRST_BUFFER_BYTES}")));
        let default = format!("{:?}", BufferSettings::default());
        let threshold = |text: &str| text.split("yield_threshold").nth(1).map(str::to_owned);
        assert_eq!(threshold(&expected), threshold(&default));
        assert_eq!(format!("{:?}", codec.encoder().buffer_settings()), expected);
        assert_eq!(format!("{:?}", codec.decoder().buffer_settings()), expected);
    }
}
