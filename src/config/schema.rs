//! The config file's JSON Schema (`switchyard schema`), derived from the types the file is read
//! into, so it cannot drift from what `check` accepts: each field with its doc line, its
//! default and its allowed values, and no key the gateway would refuse. Editors read it through
//! the `#:schema` line `init` writes (Taplo, Even Better TOML).

/// The name `init` gives the schema it writes beside the config, and its `#:schema` line names.
pub const FILE_NAME: &str = "switchyard.schema.json";

/// The schema's title: how `init` knows a schema file there is one of its own to refresh.
pub const TITLE: &str = "Switchyard config";

/// The schema, in draft 7: the one every TOML editor's schema support reads.
pub fn schema() -> serde_json::Value {
    let generator = schemars::generate::SchemaSettings::draft07().into_generator();
    let mut root = generator.into_root_schema_for::<super::file::FileConfig>();
    root.insert("title".into(), TITLE.into());
    root.insert(
        "description".into(),
        "switchyard.toml: what `switchyard check` accepts (docs/config.md).".into(),
    );
    root.to_value()
}
