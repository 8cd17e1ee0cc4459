//! fire-accelerated
