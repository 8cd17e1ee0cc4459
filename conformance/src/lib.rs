//! fire-conformance
