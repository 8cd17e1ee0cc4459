//! The Theorem 3.1 constructions (filled in by the theorem work).
