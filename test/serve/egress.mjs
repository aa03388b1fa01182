// network.allowOut/denyOut through the SDK (test/bats/egress.bats, in its world
// namespace): Sandbox.create with an allow-list, commands.run connections that
// work and fail, then sbx.updateNetwork (PUT /sandboxes/{id}/network) opening
// one name and closing another live, allowInternetAccess false denying all
// but allowOut; an invalid rule and a domain in denyOut are refused.
import { Sandbox, assert, main, cleanup, rejects, TEMPLATE } from './lib.mjs';

const has = (out, s, what) => assert(out.includes(s), `${what}: want "${s}" in: ${out}`);
const lacks = (out, s, what) => assert(!out.includes(s), `${what}: "${s}" unexpected in: ${out}`);

await main(async () => {
  const sbx = await Sandbox.create(TEMPLATE, {
    timeoutMs: 120000,
    network: {
      allowOut: ['allowed.egress.test', '198.18.0.16:443'],
      denyOut: ({ allTraffic }) => [allTraffic],
    },
  });
  cleanup.push(sbx);
  const run = async (cmd) => (await sbx.commands.run(cmd)).stdout;

  let out = await run('probe resolve allowed.egress.test; probe http 198.18.0.10 80 2000');
  has(out, 'resolve allowed.egress.test: 198.18.0.10', 'an allowed name resolves');
  has(out, 'http 198.18.0.10:80: 198.18.0.10:80', 'and connects');
  out = await run('probe resolve other.egress.test; probe connect 198.18.0.16 80 2000; ' +
    'probe http 198.18.0.16 443 2000; probe connect 198.18.0.11 80 2000');
  has(out, 'resolve other.egress.test: failed', 'a name not allowed does not resolve');
  has(out, 'connect 198.18.0.16:80: failed', 'nor its address connect on another port');
  has(out, 'http 198.18.0.16:443: 198.18.0.16:443', 'a CIDR with a port connects');
  has(out, 'connect 198.18.0.11:80: failed', 'an address never resolved does not connect');

  await sbx.updateNetwork({ allowOut: ['other.egress.test'], denyOut: ['0.0.0.0/0'] });
  out = await run('probe resolve other.egress.test; probe http 198.18.0.16 80 2000; ' +
    'probe resolve allowed.egress.test; probe connect 198.18.0.10 80 2000');
  has(out, 'http 198.18.0.16:80: 198.18.0.16:80', 'the update opened a name');
  has(out, 'resolve allowed.egress.test: failed', 'and closed the other');
  has(out, 'connect 198.18.0.10:80: failed', 'its learnt address too');

  // allowed entries win over denied ones, as E2B documents
  await sbx.updateNetwork({ allowOut: ['198.18.0.16'], denyOut: ['0.0.0.0/0', '198.18.0.0/24'] });
  out = await run('probe http 198.18.0.16 80 2000; probe http 198.18.0.10 80 2000');
  has(out, 'http 198.18.0.16:80: 198.18.0.16:80', 'an allowed address in a denied CIDR');
  has(out, 'http 198.18.0.10:80: failed', 'the rest of the denied CIDR');

  // allowInternetAccess false: all traffic denied but allowOut's
  await sbx.updateNetwork({ allowInternetAccess: false });
  out = await run('probe http 198.18.0.16 80 2000');
  has(out, 'http 198.18.0.16:80: failed', 'allowInternetAccess false denies all');
  await sbx.updateNetwork({ allowOut: ['other.egress.test'], allowInternetAccess: false });
  out = await run('probe resolve other.egress.test; probe http 198.18.0.16 80 2000; ' +
    'probe http 198.18.0.10 80 2000');
  has(out, 'http 198.18.0.16:80: 198.18.0.16:80', 'but allowOut');
  has(out, 'http 198.18.0.10:80: failed', 'and nothing else');
  await rejects(() => sbx.updateNetwork({ denyOut: ['other.egress.test'] }), null,
    'a domain in denyOut (E2B\'s 400)');

  await rejects(() => sbx.updateNetwork({ allowOut: ['a*b'] }), null, 'an invalid rule');
  // the rules stay what they were
  out = await run('probe http 198.18.0.16 80 2000');
  has(out, 'http 198.18.0.16:80: 198.18.0.16:80', 'a refused update changes nothing');
  lacks(out, 'failed', 'a refused update changes nothing');
});
