//! Human, JSON and JUnit views of a [`crate::runner::Report`].

pub mod json;
pub mod junit;
pub mod text;
