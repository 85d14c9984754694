//! Reading a config file: TOML text, `${VAR}` interpolated in string values, deserialized into
//! the file's types with the field's path in every error (and interpolated secrets masked).

use super::ConfigError;
use super::file::FileConfig;

/// TOML text → interpolated → typed, with field paths in every error.
#[cfg(test)]
pub(crate) fn parse(
    text: &str,
    shown: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<FileConfig, ConfigError> {
    let raw = raw(text, shown, env)?;
    typed(raw.value, shown, &raw.secrets)
}

/// The file as a JSON document, `${VAR}` expanded, and the values the environment gave (to be
/// masked in any error that would quote them).
pub(crate) struct Raw {
    pub value: serde_json::Value,
    pub secrets: Vec<String>,
}

pub(crate) fn raw(
    text: &str,
    shown: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Raw, ConfigError> {
    let mut value: toml::Value = toml::from_str(text).map_err(|e| ConfigError::Syntax {
        path: shown.to_string(),
        message: e.message().to_string(),
    })?;
    let mut secrets = Vec::new();
    interpolate(&mut value, &mut String::new(), shown, env, &mut secrets)?;
    let value =
        serde_json::to_value(value).map_err(|e| ConfigError::field(shown, "", e.to_string()))?;
    Ok(Raw { value, secrets })
}

/// The document deserialized into the file's types.
pub(crate) fn typed(
    value: serde_json::Value,
    shown: &str,
    secrets: &[String],
) -> Result<FileConfig, ConfigError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        // serde quotes the offending value; an interpolated one is usually a secret.
        let mut message = e.into_inner().to_string();
        for s in secrets {
            message = message.replace(s.as_str(), "***");
        }
        ConfigError::field(shown, field, message)
    })
}

/// Replaces `${VAR}` in string values only (never in keys or structure, so an environment value
/// cannot change the shape of the config). A missing variable names itself and the field.
fn interpolate(
    value: &mut toml::Value,
    path: &mut String,
    shown: &str,
    env: &dyn Fn(&str) -> Option<String>,
    secrets: &mut Vec<String>,
) -> Result<(), ConfigError> {
    match value {
        toml::Value::String(s) if s.contains("${") => {
            let mut recording = |name: &str| {
                let v = env(name);
                if let Some(v) = &v
                    && !v.is_empty()
                {
                    secrets.push(v.clone());
                }
                v
            };
            *s = expand(s, &mut recording)
                .map_err(|msg| ConfigError::field(shown, path.clone(), msg))?;
        }
        toml::Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                interpolate(item, path, shown, env, secrets)?;
                path.truncate(len);
            }
        }
        toml::Value::Table(table) => {
            for (k, v) in table.iter_mut() {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
                interpolate(v, path, shown, env, secrets)?;
                path.truncate(len);
            }
        }
        _ => {}
    }
    Ok(())
}

pub(crate) fn expand(
    s: &str,
    env: &mut dyn FnMut(&str) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| "unterminated ${ in value".to_string())?;
        let name = &after[..end];
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("invalid environment variable name ${{{name}}}"));
        }
        match env(name) {
            Some(v) => out.push_str(&v),
            None => return Err(format!("environment variable {name} is not set")),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}
