mod reproduce;
fn main() {}
