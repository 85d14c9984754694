//! The client's Responses body for an upstream that speaks the API itself.

use serde_json::{Map, Value};

/// Whether an item id was made by this gateway (`msg_sy…`, `rs_sy…`: never an upstream's hex).
fn minted(id: &str) -> bool {
    id.split_once('_')
        .is_some_and(|(_, rest)| rest.starts_with("sy"))
}

/// A Responses body for an upstream that speaks the API: items this gateway made (for an
/// answer it translated) mean nothing there. Its reasoning items carry no encrypted content and
/// go; other items lose the id it made up, so the upstream does not look for them.
pub fn for_upstream(body: &mut Map<String, Value>) {
    let Some(Value::Array(items)) = body.get_mut("input") else {
        return;
    };
    items.retain(|i| !(i["type"] == "reasoning" && i["id"].as_str().is_some_and(minted)));
    for i in items.iter_mut() {
        if i["id"].as_str().is_some_and(minted)
            && let Some(o) = i.as_object_mut()
        {
            o.remove("id");
        }
    }
}
