# A raw Connect-RPC client for serve.bats' protocol edges (loopback only).
#   connect.py PORT SANDBOX TOKEN stream METHOD JSON [HEADER=VALUE...]
#       prints each frame: "FLAGS JSON" (stdout data decoded as "stdout: TEXT")
#   connect.py PORT SANDBOX TOKEN abort METHOD JSON [HEADER=VALUE...]
#       reads the first frame, prints it, and closes the connection
#   connect.py PORT SANDBOX TOKEN unary METHOD JSON [HEADER=VALUE...]
#       prints "STATUS BODY"
import base64, http.client, json, socket, struct, sys

port, sid, tok, mode, method, body = sys.argv[1:7]
extra = dict(h.split('=', 1) for h in sys.argv[7:])
hdr = {'E2b-Sandbox-Id': sid, 'E2b-Sandbox-Port': '49983', 'Connect-Protocol-Version': '1'}
if tok != '-':
    hdr['X-Access-Token'] = tok
hdr.update(extra)
path = '/' + method
if mode == 'unary':
    c = http.client.HTTPConnection('127.0.0.1', int(port), timeout=60)
    hdr.setdefault('Content-Type', 'application/json')
    c.request('POST', path, body.encode(), hdr)
    r = c.getresponse()
    print(r.status, r.read().decode())
    sys.exit(0)
b = body.encode()
env = b'\0' + struct.pack('>I', len(b)) + b
hdr.setdefault('Content-Type', 'application/connect+json')
s = socket.create_connection(('127.0.0.1', int(port)), timeout=60)
req = f'POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(env)}\r\n'
req += ''.join(f'{k}: {v}\r\n' for k, v in hdr.items()) + '\r\n'
s.sendall(req.encode() + env)
f = s.makefile('rb')
status = f.readline().decode().strip()
chunked = False
length = 0
while True:
    line = f.readline().decode().strip()
    if not line:
        break
    if line.lower() == 'transfer-encoding: chunked':
        chunked = True
    if line.lower().startswith('content-length:'):
        length = int(line.split(':')[1])
if status.split()[1] != '200':  # an error before the stream: the status and the body
    print('HTTP', status.split()[1], f.read(length).decode())
    sys.exit(0)
buf = b''

def more():
    global buf
    if chunked:
        n = int(f.readline().strip(), 16)
        if n == 0:
            return False
        buf += f.read(n)
        f.readline()
    else:
        d = f.read1(65536)
        if not d:
            return False
        buf += d
    return True

while True:
    while len(buf) < 5 or len(buf) < 5 + struct.unpack('>I', buf[1:5])[0]:
        if not more():
            sys.exit(0)
    flags, n = buf[0], struct.unpack('>I', buf[1:5])[0]
    msg = json.loads(buf[5:5 + n])
    buf = buf[5 + n:]
    data = msg.get('event', {}).get('data', {})
    if 'stdout' in data:
        print('stdout:', base64.b64decode(data['stdout']).decode(errors='replace').rstrip('\n'), flush=True)
    else:
        print(flags, json.dumps(msg, separators=(',', ':')), flush=True)
    if mode == 'abort':
        s.close()
        sys.exit(0)
    if flags & 2:
        break
