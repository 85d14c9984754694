//! What an admin may do: `admin` everything, `viewer` read (never a secret).

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Admin,
    Viewer,
}
