//! ourios-publisher
