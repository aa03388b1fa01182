#!/usr/bin/env node
// A minimal CRI client for test/oci/oci-cri.bats (no crictl in Debian 12):
//
//   NODE_PATH=DIR node cri-client.js SOCKET METHOD [REQUEST-JSON]
//
// calls METHOD (Version, RunPodSandbox, ExecSync, ...; RuntimeService's, or
// ImageService's ImageStatus) of the CRI server on the unix socket SOCKET
// with REQUEST-JSON (default {}) as the request, in the protobuf JSON
// mapping of test/oci/cri.proto (field names as in the .proto), and prints
// the response as one line of JSON: enums by name, 64-bit integers as
// strings, bytes (ExecSync's stdout and stderr) as UTF-8 text. A gRPC error
// prints "cri-client: METHOD: CODE DETAILS" on stderr and exits 1.
// DIR holds @grpc/grpc-js and @grpc/proto-loader (test/oci/cri-npm-install).
'use strict';
const path = require('path');
const grpc = require('@grpc/grpc-js');
const loader = require('@grpc/proto-loader');

const [sock, method, req = '{}'] = process.argv.slice(2);
if (!sock || !method) {
  process.stderr.write('usage: cri-client.js SOCKET METHOD [REQUEST-JSON]\n');
  process.exit(2);
}
const def = loader.loadSync(path.join(__dirname, 'cri.proto'), {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
});
const api = grpc.loadPackageDefinition(def).runtime.v1;
const Service = method === 'ImageStatus' ? api.ImageService : api.RuntimeService;
if (!Service.service[method]) {
  process.stderr.write(`cri-client: no method ${method} in cri.proto\n`);
  process.exit(2);
}
const client = new Service('unix://' + path.resolve(sock), grpc.credentials.createInsecure());
const deadline = new Date(Date.now() + 1000 * Number(process.env.CRI_TIMEOUT || 60));
client[method](JSON.parse(req), { deadline }, (err, res) => {
  client.close();
  if (err) {
    process.stderr.write(`cri-client: ${method}: ${grpc.status[err.code]} ${err.details}\n`);
    process.exit(1);
  }
  const text = (k, v) => (v && v.type === 'Buffer' && Array.isArray(v.data) ? Buffer.from(v.data).toString() : v);
  process.stdout.write(JSON.stringify(res, text) + '\n');
});
