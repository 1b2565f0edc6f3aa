//! tcc-runtime: the library that generated code links against.
//!
//! For now it only exposes the runtime's version; task execution, tile kernels and
//! collectives arrive with the runtime issue.

pub mod kernels;

/// The runtime's version, as recorded by Cargo.
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[cfg(test)]
mod tests {
    #[test]
    fn version_is_semver() {
        let v = super::version();
        assert_eq!(v.split('.').count(), 3, "{v}");
    }
}
