//! ourios-node
