//! `/admin/{channels,keys,redirects,routers,models,webhooks,mcp_servers,teams}[/{id}]`: list, read,
//! create, change (a JSON merge patch) and delete the entries of a config section. Entries from the file are listed
//! with `"source": "file"` and cannot be changed here; the store's are `"source": "api"`.

use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::apply::{Applied, Change, IdemKey, Made, answer, apply, store};
use super::{Admin, ControlError, mask};
use crate::config::overlay::{SECTIONS, id_field};
use crate::config::{Origin, Snapshot};
use crate::server::ApiError;
use crate::store::objects::Action;

/// A section the admin API manages, or 404.
fn section(name: &str) -> Result<&'static str, ApiError> {
    SECTIONS
        .iter()
        .find(|(s, _)| *s == name)
        .map(|(s, _)| *s)
        .ok_or_else(|| ApiError::NotFound(format!("/admin/{name}")))
}

/// The groups an entry is in (channels and keys have groups; others are global).
fn groups(v: &Value) -> Vec<&str> {
    v.get("groups")
        .and_then(Value::as_array)
        .map(|g| g.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Whether the caller may see (and change) this entry. A key with no groups may use every
/// channel: it is no group's, so only an admin of every group sees it. An admin limited to
/// teams sees only its teams' keys and its teams (and may make sub-teams of them).
fn visible(admin: &Admin, section: &str, v: &Value) -> bool {
    let text = |f: &str| v.get(f).and_then(Value::as_str);
    let team_scoped = !admin.caller.teams.is_empty();
    match section {
        "keys" => admin.caller.sees_key(&groups(v)) && admin.sees_team_named(text("team")),
        "teams" => {
            admin.caller.sees_key(&groups(v))
                && (admin.sees_team_named(text("name")) || admin.sees_team_named(text("parent")))
        }
        "channels" | "mcp_servers" => !team_scoped && admin.caller.sees(&groups(v)),
        _ => !team_scoped,
    }
}

/// An entry as answered: masked, with its source (and a channel's live health).
fn shown(admin: &Admin, section: &str, index: usize, origin: Origin, v: &Value) -> Value {
    let mut out = mask::entry(section, v);
    if let Some(obj) = out.as_object_mut() {
        let field = id_field(section).unwrap_or("name");
        if !obj.contains_key(field)
            && let Some(id) = admin.snap.view.id_of(section, index, v)
        {
            obj.insert(field.into(), json!(id));
        }
        obj.insert("source".into(), json!(origin.as_str()));
        let name = v.get("name").and_then(Value::as_str).unwrap_or("");
        if section == "channels" {
            obj.insert("health".into(), health(admin, name));
        }
        if section == "mcp_servers" {
            obj.insert("health".into(), replicas_health(admin, name));
            obj.insert("tools".into(), kept_tools(admin, name));
        }
    }
    out
}

/// The tools an MCP server last listed (none before a session first read its list).
fn kept_tools(admin: &Admin, server: &str) -> Value {
    let kept = admin.mcp.lists.fresh(
        &server.into(),
        crate::mcp::lists::Kind::Tools,
        std::time::Duration::MAX,
    );
    let tools = kept.iter().flat_map(|l| l.iter()).map(|t| {
        json!({"name": t.get("name"), "description": t.get("description"),
               "annotations": t.get("annotations")})
    });
    Value::Array(tools.collect())
}

/// An MCP server's replicas as health keeps them (`mcp:<server>#<i>`; unknown: healthy).
fn replicas_health(admin: &Admin, server: &str) -> Value {
    let report = admin.state.health.report(&admin.snap.health);
    let Some(s) = admin.snap.mcp.server(server) else {
        return json!([]);
    };
    let rows = report.as_array();
    let each = s.replicas.iter().map(|r| {
        let row = rows.and_then(|rows| rows.iter().find(|x| x["channel"] == *r.health));
        let url = crate::provider::redact_url(r.url.as_str());
        match row {
            Some(x) => json!({"replica": url, "score": x["score"], "circuit": x["circuit"]}),
            None => json!({"replica": url, "score": 100.0, "circuit": "closed"}),
        }
    });
    Value::Array(each.collect())
}

fn health(admin: &Admin, channel: &str) -> Value {
    let report = admin.state.health.report(&admin.snap.health);
    let row = report
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["channel"] == channel));
    match row {
        Some(r) => json!({"score": r["score"], "circuit": r["circuit"]}),
        None => json!({"score": 100.0, "circuit": "closed"}),
    }
}

/// The entry `id` names in `snap`, when the caller may see it: its index, origin and body.
fn find<'a>(
    admin: &Admin,
    snap: &'a Snapshot,
    section: &str,
    id: &str,
) -> Result<(usize, Origin, &'a Value), ApiError> {
    snap.view
        .entry(section, id)
        .filter(|(_, _, v)| visible(admin, section, v))
        .ok_or_else(|| {
            ControlError::Missing {
                section: section.into(),
                id: id.into(),
            }
            .into()
        })
}

pub async fn list(admin: Admin, Path(name): Path<String>) -> Response {
    let section = match section(&name) {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    let snap = admin.snap.clone();
    let data: Vec<Value> = snap
        .view
        .entries(section)
        .into_iter()
        .enumerate()
        .filter(|(_, (_, v))| visible(&admin, section, v))
        .map(|(i, (o, v))| shown(&admin, section, i, o, v))
        .collect();
    axum::Json(json!({"object": "list", "data": data, "version": snap.view.store_version}))
        .into_response()
}

pub async fn read(admin: Admin, Path((name, id)): Path<(String, String)>) -> Response {
    let snap = admin.snap.clone();
    let found = section(&name).and_then(|s| Ok((s, find(&admin, &snap, s, &id)?)));
    match found {
        Ok((s, (i, o, v))) => axum::Json(shown(&admin, s, i, o, v)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// An MCP server made through the API is a URL: an admin token must not be a way to run a
/// program on the gateway's host, so stdio servers come from the file only.
fn runs_nothing(section: &str, body: &Map<String, Value>) -> Result<(), ApiError> {
    if section != "mcp_servers" {
        return Ok(());
    }
    for field in ["command", "args", "env", "pool"] {
        if body.contains_key(field) {
            return Err(ControlError::invalid(
                field,
                "stdio servers are configured in the file only: the admin API runs no programs",
            )
            .into());
        }
    }
    Ok(())
}

/// A write's refusal when the caller is limited to groups and the entry is outside them (or
/// the section is global).
fn in_scope(admin: &Admin, section: &str, body: &Value) -> Result<(), ApiError> {
    let team_ok = matches!(section, "keys" | "teams") && visible(admin, section, body);
    if !admin.caller.teams.is_empty() && !team_ok {
        return Err(ControlError::OutOfScope(format!(
            "admin {:?} may only change its teams' keys and sub-teams",
            &*admin.caller.name
        ))
        .into());
    }
    if admin.caller.groups.is_empty() {
        return Ok(());
    }
    let ok =
        matches!(section, "channels" | "keys" | "mcp_servers") && visible(admin, section, body);
    if !ok {
        return Err(ControlError::OutOfScope(format!(
            "admin {:?} may only change channels, keys and MCP servers of its groups",
            &*admin.caller.name
        ))
        .into());
    }
    if section == "channels" {
        // A channel serves every key that can reach it: all of those must be this admin's,
        // or its traffic (prompts included) would go where another group's admin sent it.
        let ch = groups(body);
        let ch: Vec<&str> = if ch.is_empty() {
            vec![crate::config::DEFAULT_GROUP]
        } else {
            ch
        };
        for k in &admin.snap.keys {
            let reaches = k.groups.is_empty() || k.groups.iter().any(|g| ch.contains(&&**g));
            let key_groups: Vec<&str> = k.groups.iter().map(|g| &**g).collect();
            if reaches && !admin.caller.sees_key(&key_groups) {
                return Err(ControlError::OutOfScope(format!(
                    "key {:?}, outside admin {:?}'s groups, would be served by this channel",
                    &*k.name, &*admin.caller.name
                ))
                .into());
            }
        }
    }
    Ok(())
}

pub async fn create(
    admin: Admin,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    match create_entry(&admin, &name, &headers, &body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// A request's fingerprint for its Idempotency-Key: the key reused for another request is
/// refused rather than answered with the first one's answer.
fn fingerprint(section: &str, body: &[u8]) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(b"POST /admin/");
    ctx.update(section.as_bytes());
    ctx.update(b"\n");
    ctx.update(body);
    crate::secret::hex(ctx.finish().as_ref())
}

async fn create_entry(
    admin: &Admin,
    name: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let section = section(name)?;
    store(&admin.state)?;
    let idem_key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.is_empty() && k.len() <= 255);
    let print = fingerprint(section, body);
    let mut entry = object(body)?;
    let field = id_field(section).unwrap_or("name");
    if section == "redirects" && !entry.contains_key("id") {
        entry.insert("id".into(), json!(format!("rd_{}", fastrand_id())));
    }
    let id = match entry.get(field) {
        Some(Value::String(s)) if !s.is_empty() && !s.starts_with("file:") => s.clone(),
        _ => return Err(ControlError::invalid(field, "required: a non-empty string").into()),
    };
    runs_nothing(section, &entry)?;
    let mut entry = Value::Object(entry);
    in_scope(admin, section, &entry)?;
    if admin
        .snap
        .view
        .entry(section, &id)
        .is_some_and(|(_, o, _)| o == Origin::File)
    {
        return Err(ControlError::Exists {
            section: section.into(),
            id,
            where_: " in the config file",
        }
        .into());
    }
    let made_key = match section {
        "keys" => hash_key(admin, &mut entry, true)?,
        "webhooks" => webhook_secret(&mut entry)?,
        _ => None,
    };
    let diff = json!({"after": mask::entry(section, &entry)});
    let make = |current: Option<&Value>| {
        if current.is_some() {
            return Err(ApiError::from(ControlError::Exists {
                section: section.into(),
                id: id.clone(),
                where_: " in the store",
            }));
        }
        Ok(Made::Write {
            body: Some(entry.clone()),
            diff: diff.clone(),
        })
    };
    let idem = idem_key.map(|key| IdemKey {
        key,
        fingerprint: &print,
    });
    let change = Change {
        section,
        id: &id,
        action: Action::Create,
    };
    match apply(
        &admin.state,
        &admin.caller.name,
        change,
        &make,
        idem,
        crate::clock::unix_ms(),
    )
    .await?
    {
        Applied::Replayed(kept) => Ok(super::docs::replay(&kept, &print)),
        _ => {
            let mut answer = answer(section, &entry);
            if let Some(k) = made_key {
                // Shown this once: the store keeps only its hash (or, for a webhook's
                // secret, seals it); a replay answers without it.
                let field = if section == "webhooks" {
                    "secret"
                } else {
                    "key"
                };
                answer[field] = json!(k);
            }
            Ok((StatusCode::CREATED, axum::Json(answer)).into_response())
        }
    }
}

fn fastrand_id() -> String {
    std::iter::repeat_with(fastrand::alphanumeric)
        .take(12)
        .collect()
}

/// A request body that must be a JSON object.
fn object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(mut m)) => {
            m.values_mut().for_each(integral);
            Ok(m)
        }
        Ok(_) => Err(ControlError::invalid("", "expected a JSON object").into()),
        Err(e) => Err(ApiError::InvalidJson(e.to_string())),
    }
}

/// Numbers with no fraction (`1000.0`) made integers: JSON does not tell them apart, so a
/// field that takes an integer takes them too.
fn integral(v: &mut Value) {
    match v {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            // Within ±2^53 a float is an exact integer, when it has no fraction.
            if f.fract() == 0.0 && f.abs() <= 9_007_199_254_740_992.0 {
                *v = Value::from(f as i64);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(integral),
        Value::Object(m) => m.values_mut().for_each(integral),
        _ => {}
    }
}

/// A gateway key entry as the store keeps it: its `key` (given, or made when `generate` and
/// none is given) replaced by `key_hash`. Returns the key made, to be answered once.
fn hash_key(admin: &Admin, entry: &mut Value, generate: bool) -> Result<Option<String>, ApiError> {
    let Some(obj) = entry.as_object_mut() else {
        return Ok(None);
    };
    if obj.contains_key("key_hash") {
        return Err(
            ControlError::invalid("key_hash", "is set by the gateway; give `key` or none").into(),
        );
    }
    let given = match obj.remove("key") {
        Some(Value::String(k)) => Some(k),
        Some(_) => return Err(ControlError::invalid("key", "expected a string").into()),
        None => None,
    };
    let (key, made) = match given {
        Some(k) => {
            crate::config::short_key(&k).map_err(|why| ControlError::invalid("key", why))?;
            (k, None)
        }
        None if generate => {
            let k = crate::store::seal::generate_key()
                .map_err(|e| ControlError::Store(e.to_string()))?;
            (k.clone(), Some(k))
        }
        None => return Ok(None),
    };
    let pepper = admin
        .state
        .store
        .as_ref()
        .and_then(|s| s.pepper())
        .ok_or(ControlError::NoMasterKey)?;
    if admin.snap.authenticate(&key).is_some() {
        return Err(ControlError::invalid("key", "this key is already in use").into());
    }
    obj.insert("key_hash".into(), json!(pepper.hash(&key)));
    Ok(made)
}

/// A webhook made without a `secret` gets one (`whsec_…`), returned to be answered once.
fn webhook_secret(entry: &mut Value) -> Result<Option<String>, ApiError> {
    let Some(obj) = entry.as_object_mut() else {
        return Ok(None);
    };
    if obj.contains_key("secret") {
        return Ok(None);
    }
    let s = crate::config::webhooks::generate_secret()
        .map_err(|_| ControlError::Store("no randomness for a webhook secret".into()))?;
    obj.insert("secret".into(), json!(s));
    Ok(Some(s))
}

/// RFC 7386: `null` removes a member, an object merges, anything else replaces.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// A file entry cannot be changed here: 409 read_only.
fn not_from_file(admin: &Admin, section: &str, id: &str) -> Result<(), ApiError> {
    if let Some((_, Origin::File, _)) = admin.snap.view.entry(section, id) {
        return Err(ControlError::ReadOnly(format!(
            "{section} {id:?} comes from the config file: change it there"
        ))
        .into());
    }
    Ok(())
}

fn missing(section: &str, id: &str) -> ApiError {
    ControlError::Missing {
        section: section.into(),
        id: id.into(),
    }
    .into()
}

pub async fn update(
    admin: Admin,
    Path((name, id)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    match update_entry(&admin, &name, &id, &body).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn update_entry(admin: &Admin, name: &str, id: &str, body: &[u8]) -> Result<Value, ApiError> {
    let section = section(name)?;
    store(&admin.state)?;
    not_from_file(admin, section, id)?;
    let patch = object(body)?;
    runs_nothing(section, &patch)?;
    let mut patch = Value::Object(patch);
    let field = id_field(section).unwrap_or("name");
    if patch.get(field).is_some_and(|v| v.as_str() != Some(id)) {
        return Err(ControlError::invalid(field, "cannot be changed; create another entry").into());
    }
    // A new `key` in the patch is hashed now, like on creation; none keeps the old hash.
    let mut new_key = json!({});
    if section == "keys" {
        if patch.get("key_hash").is_some() {
            return Err(ControlError::invalid("key_hash", "is set by the gateway").into());
        }
        if let Some(k) = patch.as_object_mut().and_then(|p| p.remove("key")) {
            new_key["key"] = k;
            hash_key(admin, &mut new_key, false)?;
        }
    }
    let diff = json!({"patch": mask::entry(section, &patch)});
    let make = |current: Option<&Value>| {
        let Some(current) = current.filter(|v| visible(admin, section, v)) else {
            return Err(missing(section, id));
        };
        let mut next = current.clone();
        merge_patch(&mut next, &new_key);
        merge_patch(&mut next, &patch);
        in_scope(admin, section, &next)?;
        Ok(Made::Write {
            body: Some(next),
            diff: diff.clone(),
        })
    };
    let change = Change {
        section,
        id,
        action: Action::Update,
    };
    match apply(
        &admin.state,
        &admin.caller.name,
        change,
        &make,
        None,
        crate::clock::unix_ms(),
    )
    .await?
    {
        Applied::Done(Some(next)) => Ok(answer(section, &next)),
        _ => Err(missing(section, id)),
    }
}

pub async fn remove(admin: Admin, Path((name, id)): Path<(String, String)>) -> Response {
    match remove_entry(&admin, &name, &id).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn remove_entry(admin: &Admin, name: &str, id: &str) -> Result<Value, ApiError> {
    let section = section(name)?;
    store(&admin.state)?;
    not_from_file(admin, section, id)?;
    let make = |current: Option<&Value>| {
        let Some(current) = current else {
            // Already gone: deleting again is not an error.
            return Ok(Made::Nothing);
        };
        if !visible(admin, section, current) {
            return Err(missing(section, id));
        }
        in_scope(admin, section, current)?;
        Ok(Made::Write {
            body: None,
            diff: json!({"before": mask::entry(section, current)}),
        })
    };
    let change = Change {
        section,
        id,
        action: Action::Delete,
    };
    match apply(
        &admin.state,
        &admin.caller.name,
        change,
        &make,
        None,
        crate::clock::unix_ms(),
    )
    .await
    {
        Ok(_) | Err(ApiError::Control(ControlError::Missing { .. }))
            if admin.caller.groups.is_empty() =>
        {
            Ok(json!({"id": id, "deleted": true}))
        }
        Ok(_) => Ok(json!({"id": id, "deleted": true})),
        Err(e) => Err(e),
    }
}
