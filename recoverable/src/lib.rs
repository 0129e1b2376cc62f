//! ourios-recoverable
