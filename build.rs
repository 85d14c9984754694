//! The store's migrations are embedded by `sqlx::migrate!` when the crate compiles: without this,
//! a migration added with no change to the Rust code would be left out of an incremental build.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
