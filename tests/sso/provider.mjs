// A real OpenID provider for the console's SSO tests: `oidc-provider` (certified by the
// OpenID Foundation) with its development login and consent pages. Any password signs in; a
// person's groups are the test's (`GROUPS` as JSON: {"alice": ["sy-admins"], ...}).
//
//   PORT=… CLIENT_SECRET=… REDIRECT_URIS=a,b LOGOUT_URIS=a,b GROUPS='{…}' node provider.mjs
import Provider from "oidc-provider";

const port = Number(process.env.PORT);
const groups = JSON.parse(process.env.GROUPS || "{}");
const issuer = `http://127.0.0.1:${port}`;

const oidc = new Provider(issuer, {
  clients: [{
    client_id: "switchyard",
    client_secret: process.env.CLIENT_SECRET,
    redirect_uris: process.env.REDIRECT_URIS.split(","),
    post_logout_redirect_uris: process.env.LOGOUT_URIS.split(","),
    grant_types: ["authorization_code"],
    response_types: ["code"],
    token_endpoint_auth_method: "client_secret_basic",
    id_token_signed_response_alg: process.env.ID_TOKEN_ALG || "RS256",
  }],
  claims: { openid: ["sub"], email: ["email"], groups: ["groups"] },
  scopes: ["openid", "email", "groups"],
  // The requested claims go in the ID token itself (the console reads only it).
  conformIdTokenClaims: false,
  pkce: { required: () => true },
  features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
  cookies: { keys: ["switchyard-sso-test-cookies"] },
  findAccount: async (ctx, id) => ({
    accountId: id,
    claims: async () => ({ sub: id, email: `${id}@example.test`, groups: groups[id] || [] }),
  }),
});

oidc.listen(port, "127.0.0.1", () => console.log(`ready ${issuer}`));
