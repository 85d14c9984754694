//! Clients that authenticate with a token another party signed rather than a gateway key: JWTs
//! from `[[auth.jwt]]` issuers, checked against the issuer's published keys (`jwt`); and the
//! console's single sign-on by OpenID Connect (`oidc`).

pub mod jwt;
pub mod oidc;

/// A client for an identity provider's documents and token endpoint: no redirect followed, no
/// proxy, and no idle connection kept. Its calls are rare, and a pooled connection the provider
/// closed while idle (Node's 5 s keep-alive) would fail the next sign-in.
fn provider_client(timeout: std::time::Duration) -> reqwest::Client {
    crate::provider::install_crypto_provider();
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .pool_max_idle_per_host(0)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .unwrap_or_default()
}
