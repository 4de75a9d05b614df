//! windrose-model's integration tests, one binary: each file of tests/ is a module here
//! (`cargo test -p windrose-model --test integration -- FILE::` runs one file's tests).
//! One binary links the crate and its dependencies once instead of once per file, which
//! was most of the test build's time.

mod forecast;
mod forecast_alloc;
mod load;
mod units;
