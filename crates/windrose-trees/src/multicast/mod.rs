//! Bandwidth-oriented multicast (seed 002): the physical limit of a multicast on a platform
//! ([`bound`]: max-flow from the root to each receiver) and Balanced Multicasting's plan of
//! several rate-shaped trees ([`balanced`]). Pure functions of a
//! [`Platform`](windrose_model::platform::Platform); no clocks, no I/O.

pub mod balanced;
pub mod bound;
