//! Loading cost models from CSV and TOML files (filled in by the loader work).
