// A real OpenID Connect provider for the sign-in tests: oidc-provider with one confidential
// client, a login form of its own that checks passwords, and a `groups` claim.
//
//   node provider.js PORT STATE_FILE REDIRECT_URI [REDIRECT_URI ...]
//
// STATE_FILE is JSON the tests write and this script reads on every request, so a test
// changes a person's groups (or how the next ID token goes out) between two sign-ins:
//   {"users": {"dana": {"password": "...", "email": "...", "groups": ["aimon-operators"]}},
//    "id_token": "normal" | "tampered" | "expired"}
// "tampered" changes the payload of the ID token the token endpoint sends and keeps its
// signature; "expired" sends one properly signed by this provider's key whose exp has passed.
// It prints "listening on PORT" once it accepts connections.

import { readFileSync } from 'node:fs';
import { parse } from 'node:querystring';

import { exportJWK, generateKeyPair, importJWK, SignJWT } from 'jose';
import Provider from 'oidc-provider';

const CLIENT_ID = 'aimon-admin';
const CLIENT_SECRET = 'aimon-admin-test-client-secret';
const SCOPES = 'openid profile email groups';

const [port, stateFile, ...redirectUris] = process.argv.slice(2);
if (!port || !stateFile || redirectUris.length === 0) {
  console.error('usage: node provider.js PORT STATE_FILE REDIRECT_URI [REDIRECT_URI ...]');
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;

function state() {
  return JSON.parse(readFileSync(stateFile, 'utf8'));
}

const { privateKey } = await generateKeyPair('RS256', { extractable: true });
const signingJwk = { ...(await exportJWK(privateKey)), kid: 'test-key', alg: 'RS256', use: 'sig' };

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: CLIENT_ID,
      client_secret: CLIENT_SECRET,
      redirect_uris: redirectUris,
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  jwks: { keys: [signingJwk] },
  cookies: { keys: ['test-cookie-key-one-0123456789'] },
  scopes: ['openid', 'profile', 'email', 'groups'],
  claims: {
    openid: ['sub'],
    profile: ['preferred_username', 'name'],
    email: ['email', 'email_verified'],
    groups: ['groups'],
  },
  features: { devInteractions: { enabled: false } },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  async findAccount(ctx, id) {
    const user = state().users[id];
    if (!user) return undefined;
    return {
      accountId: id,
      async claims() {
        const current = state().users[id] || {};
        const claims = { sub: id, preferred_username: id, name: id, email: current.email, email_verified: true };
        // A person with no "groups" key gets no groups claim at all (the "missing claim" case).
        if ('groups' in current) claims.groups = current.groups;
        return claims;
      },
    };
  },
  // The product is this provider's own application: no consent screen, every scope granted.
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) {
      const found = await ctx.oidc.provider.Grant.find(grantId);
      if (found) return found;
    }
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope(SCOPES);
    await grant.save();
    return grant;
  },
});

function loginPage(uid, error) {
  const message = error ? `<p role="alert">${error}</p>` : '';
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Test provider: sign in</title></head>
<body><h1>Test provider</h1>${message}
<form method="post" action="/interaction/${uid}/login">
<label>Provider username <input name="login" autocomplete="off" required></label>
<label>Provider password <input name="password" type="password" required></label>
<button type="submit">Sign in at the provider</button></form></body></html>`;
}

async function readForm(req) {
  let body = '';
  for await (const chunk of req) body += chunk;
  return parse(body);
}

async function tamper(idToken) {
  const mode = state().id_token || 'normal';
  if (mode === 'tampered') {
    const [header, payload, signature] = idToken.split('.');
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString());
    claims.groups = ['aimon-operators'];
    claims.sub = `${claims.sub}-forged`;
    return [header, Buffer.from(JSON.stringify(claims)).toString('base64url'), signature].join('.');
  }
  if (mode === 'expired') {
    const [, payload] = idToken.split('.');
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString());
    const now = Math.floor(Date.now() / 1000);
    const key = await importJWK(signingJwk, 'RS256');
    return new SignJWT({ ...claims, iat: now - 7200, exp: now - 3600 })
      .setProtectedHeader({ alg: 'RS256', kid: signingJwk.kid, typ: 'JWT' })
      .sign(key);
  }
  return idToken;
}

provider.use(async (ctx, next) => {
  const match = ctx.path.match(/^\/interaction\/([^/]+)(\/login)?$/);
  if (match) {
    const details = await provider.interactionDetails(ctx.req, ctx.res);
    if (ctx.method === 'GET' && !match[2]) {
      ctx.type = 'html';
      ctx.body = loginPage(details.uid);
      return;
    }
    if (ctx.method === 'POST' && match[2]) {
      const form = await readForm(ctx.req);
      const user = state().users[form.login];
      if (!user || user.password !== form.password) {
        ctx.type = 'html';
        ctx.body = loginPage(details.uid, 'Wrong username or password.');
        return;
      }
      await provider.interactionFinished(ctx.req, ctx.res, { login: { accountId: form.login } }, { mergeWithLastSubmission: false });
      return;
    }
  }
  await next();
  if (ctx.path === '/token' && ctx.body && typeof ctx.body === 'object' && ctx.body.id_token) {
    ctx.body = { ...ctx.body, id_token: await tamper(ctx.body.id_token) };
  }
});

provider.listen(Number(port), '127.0.0.1', () => {
  console.log(`listening on ${port}`);
});
