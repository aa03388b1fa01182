// A 50 MiB file through the SDK both ways, compared by hash: uploaded as
// an ArrayBuffer (multipart) and as a ReadableStream (octet-stream), read
// back as bytes and as a stream. The server's memory is checked by the
// caller (test/bats/serve-files.bats) from its VmHWM.
import crypto from 'node:crypto';
import { Sandbox, eq, main, cleanup, TEMPLATE } from './lib.mjs';

const MiB = 1 << 20;
const sha = (b) => crypto.createHash('sha256').update(b).digest('hex');

await main(async () => {
  const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 300000 });
  cleanup.push(sbx);
  const data = crypto.randomBytes(50 * MiB);
  const want = sha(data);
  const t0 = Date.now();
  await sbx.files.write('/tmp/big.bin', data.buffer.slice(data.byteOffset, data.byteOffset + data.length),
    { requestTimeoutMs: 240000 });
  const t1 = Date.now();
  const back = await sbx.files.read('/tmp/big.bin', { format: 'bytes', requestTimeoutMs: 240000 });
  const t2 = Date.now();
  eq(back.length, data.length, 'size read back');
  eq(sha(back), want, 'hash read back');
  console.log(`# 50 MiB: upload ${(50000 / (t1 - t0)).toFixed(1)} MB/s, download ${(50000 / (t2 - t1)).toFixed(1)} MB/s`);

  // streamed both ways: 50 MiB in 1 MiB chunks, nothing held whole here
  let sent = 0;
  const stream = new ReadableStream({
    pull(ctl) {
      if (sent >= data.length) return ctl.close();
      ctl.enqueue(new Uint8Array(data.subarray(sent, sent + MiB)));
      sent += MiB;
    },
  });
  await sbx.files.write('/tmp/big2.bin', stream, { requestTimeoutMs: 240000 });
  const h = crypto.createHash('sha256');
  let n = 0;
  for await (const chunk of await sbx.files.read('/tmp/big2.bin', { format: 'stream', requestTimeoutMs: 240000 })) {
    h.update(chunk);
    n += chunk.length;
  }
  eq(n, data.length, 'size of the streamed copy');
  eq(h.digest('hex'), want, 'hash of the streamed copy');
});
