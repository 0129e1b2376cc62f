//! Integration tests of the publish protocol: RFC0054.1, .3 and RFC0056.1, .2 and the
//! publisher legs of RFC 0054 §9.7. Every test reads the store back and counts by record id.

mod rig;

mod ordering;
mod publisher_thread;
mod rfc0054;
mod rfc0056;
mod sm;
