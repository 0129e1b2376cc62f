//! ourios-wal
