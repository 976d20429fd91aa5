"""nsqlookupd v1.3.0's HTTP answers, checked against a lookup service with no topics yet:
status, body, Content-Type and X-NSQ-Content-Type of /ping, error bodies, unknown routes, wrong
methods, malformed query strings and the trailing-slash redirect, each with and without
`Accept: application/vnd.nsq; version=1.0` (v1.3.0 answers both the same way, no envelope).
The same cases must pass against official nsqlookupd and rustqueue-discovery.

Usage: http_cases.py HOST:PORT    prints PASS/FAIL http/<case> lines; exit 1 on any FAIL.
"""
import http.client
import sys

JSON = "application/json; charset=utf-8"
NSQ = "nsq; version=1.0"
ACCEPT = {"Accept": "application/vnd.nsq; version=1.0"}

# name, method, path, status, body (None: not compared), content-type, x-nsq-content-type
CASES = [
    ("ping", "GET", "/ping", 200, "OK", "text/plain; charset=utf-8", None),
    ("topics-empty", "GET", "/topics", 200, '{"topics":[]}', JSON, NSQ),
    ("lookup-unknown", "GET", "/lookup?topic=nope", 404, '{"message":"TOPIC_NOT_FOUND"}', JSON, NSQ),
    ("lookup-long-topic", "GET", "/lookup?topic=" + "a" * 20000, 404, '{"message":"TOPIC_NOT_FOUND"}', JSON, NSQ),
    ("lookup-no-topic", "GET", "/lookup", 400, '{"message":"MISSING_ARG_TOPIC"}', JSON, NSQ),
    ("lookup-other-arg", "GET", "/lookup?channel=c", 400, '{"message":"MISSING_ARG_TOPIC"}', JSON, NSQ),
    ("lookup-bad-escape", "GET", "/lookup?topic=%zz", 400, '{"message":"INVALID_REQUEST"}', JSON, NSQ),
    ("lookup-semicolon", "GET", "/lookup?topic=a;b", 400, '{"message":"INVALID_REQUEST"}', JSON, NSQ),
    ("channels-no-topic", "GET", "/channels", 400, '{"message":"MISSING_ARG_TOPIC"}', JSON, NSQ),
    ("channels-unknown", "GET", "/channels?topic=nope", 200, '{"channels":[]}', JSON, NSQ),
    ("channels-bad-escape", "GET", "/channels?topic=%", 400, '{"message":"INVALID_REQUEST"}', JSON, NSQ),
    ("nodes", "GET", "/nodes", 200, None, JSON, NSQ),
    ("info", "GET", "/info", 200, None, JSON, NSQ),
    ("unknown-route", "GET", "/nope", 404, '{"message":"NOT_FOUND"}', JSON, NSQ),
    ("unknown-deep-route", "GET", "/v2/lookup/x", 404, '{"message":"NOT_FOUND"}', JSON, NSQ),
    ("post-lookup", "POST", "/lookup?topic=x", 405, '{"message":"METHOD_NOT_ALLOWED"}', JSON, NSQ),
    ("delete-topics", "DELETE", "/topics", 405, '{"message":"METHOD_NOT_ALLOWED"}', JSON, NSQ),
    ("head-ping", "HEAD", "/ping", 405, "", JSON, NSQ),
    ("options-lookup", "OPTIONS", "/lookup", 200, "", None, None),
    ("trailing-slash", "GET", "/lookup/?topic=x", 301, None, None, None),
    ("double-slash", "GET", "//lookup?topic=x", 301, None, None, None),
    ("upper-case", "GET", "/LOOKUP?topic=x", 301, None, None, None),
    ("post-trailing-slash", "POST", "/lookup/", 404, '{"message":"NOT_FOUND"}', JSON, NSQ),
]


def check(host, port, name, method, path, status, body, ctype, nsq_ctype, headers):
    c = http.client.HTTPConnection(host, port, timeout=5)
    c.request(method, path, headers=headers)
    r = c.getresponse()
    got = r.read().decode(errors="replace")
    problems = []
    if r.status != status:
        problems.append("status %d, want %d" % (r.status, status))
    if body is not None and got != body:
        problems.append("body %r, want %r" % (got, body))
    if ctype is not None and r.getheader("Content-Type") != ctype:
        problems.append("Content-Type %r, want %r" % (r.getheader("Content-Type"), ctype))
    if r.getheader("X-NSQ-Content-Type") != nsq_ctype:
        problems.append("X-NSQ-Content-Type %r, want %r" % (r.getheader("X-NSQ-Content-Type"), nsq_ctype))
    if status == 301 and not (r.getheader("Location") or "").endswith("/lookup?topic=x"):
        problems.append("Location %r" % r.getheader("Location"))
    c.close()
    return problems


def main():
    host, port = sys.argv[1].rsplit(":", 1)
    failed = False
    for case in CASES:
        for suffix, headers in (("", {}), ("+accept", ACCEPT)):
            problems = check(host, int(port), *case, headers)
            name = "http/" + case[0] + suffix
            if problems:
                failed = True
                print("FAIL %s: %s" % (name, "; ".join(problems)))
            else:
                print("PASS %s" % name)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
