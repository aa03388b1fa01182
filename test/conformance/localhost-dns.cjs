// Preloaded (node --require) by scripts/e2b-conformance: names under
// localhost resolve to 127.0.0.1 in Node as they do in browsers (RFC 6761),
// so the SDK's port URLs (https://PORT-ID.localhost:P, the domain serve
// answers) reach serve --ports-listen. Node's own lookup asks the system's
// resolver, which does not know these names (and the run's network
// namespace has no route to it). Other names are looked up as before.
'use strict';
const dns = require('node:dns');

const local = (h) => typeof h === 'string' && /(^|\.)localhost\.?$/i.test(h);
const orig = dns.lookup;
dns.lookup = function lookup(host, opts, cb) {
  if (!local(host)) return orig.apply(this, arguments);
  if (typeof opts === 'function') { cb = opts; opts = {}; }
  if (typeof opts === 'number') opts = { family: opts };
  const a = { address: '127.0.0.1', family: 4 };
  process.nextTick(() => (opts && opts.all ? cb(null, [a]) : cb(null, a.address, a.family)));
};
const origP = dns.promises.lookup;
dns.promises.lookup = async function lookup(host, opts) {
  if (!local(host)) return origP.apply(this, arguments);
  const a = { address: '127.0.0.1', family: 4 };
  return opts && typeof opts === 'object' && opts.all ? [a] : a;
};
