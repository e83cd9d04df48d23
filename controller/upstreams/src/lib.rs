//! The built-in model upstreams `eval run` can start on loopback instead of a real provider:
//! the deterministic fixture upstream (the demo, `--upstream fixture`) and the model-free one
//! (`--upstream model-free`), both behind one OpenAI-compatible framing ([`loopback`]).
//!
//! Architecture Invariant: nothing here knows about runs, ledgers or containers; the engine
//! starts these servers and hands their address to the proxy like any other upstream.

pub mod fixture;
pub mod key;
pub mod loopback;
pub mod model_free;

pub use key::FixtureKey;
