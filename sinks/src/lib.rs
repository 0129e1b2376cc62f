//! ourios-sinks
