//! Empty: with a build script, Cargo also applies the host-side pins
//! under `[build-dependencies]`.

fn main() {}
