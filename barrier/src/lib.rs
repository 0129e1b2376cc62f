//! ourios-barrier
