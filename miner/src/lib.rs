//! ourios-miner
