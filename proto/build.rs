//! Generates the gRPC code from `borbaman.proto` with a vendored `protoc`, so
//! a fresh machine needs no system install.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // Undecodable messages are INVALID_ARGUMENT, not prost's INTERNAL.
    tonic_prost_build::configure()
        .codec_path("crate::codec::StrictCodec")
        .compile_with_config(config, &["borbaman.proto"], &["."])?;
    println!("cargo:rerun-if-changed=borbaman.proto");
    Ok(())
}
