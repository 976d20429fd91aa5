#!/usr/bin/env bash
# Generates the matrix's TLS material into DIR with the openssl CLI:
#   ca.pem                          test CA (trusted by clients and by the broker for mTLS)
#   server.pem / server-key.pem     broker certificate for 127.0.0.1 and localhost
#   client.pem / client-key.pem     client certificate, CN=rustqueue-compat-client (the auth server's CN)
#   rogue-client.pem / -key.pem     a client certificate from another CA (must be refused)
# Keys are PKCS#8 P-256. Usage: gen-tls.sh DIR
set -euo pipefail
dir="$1"
mkdir -p "$dir"
cd "$dir"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() { # ca NAME CN
  key "$1-key.pem"
  openssl req -x509 -new -key "$1-key.pem" -subj "/CN=$2" -days 2 -out "$1.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
}
leaf() { # leaf NAME CA CN EXT
  key "$1-key.pem"
  openssl req -new -key "$1-key.pem" -subj "/CN=$3" -out "$1.csr"
  printf '%s\n' "$4" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2-key.pem" -CAcreateserial -days 2 \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
ca ca "RustQueue compat CA"
ca rogue-ca "Rogue CA"
leaf server ca "127.0.0.1" "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth
basicConstraints=CA:FALSE"
leaf client ca "rustqueue-compat-client" "extendedKeyUsage=clientAuth
basicConstraints=CA:FALSE"
leaf rogue-client rogue-ca "rustqueue-compat-client" "extendedKeyUsage=clientAuth
basicConstraints=CA:FALSE"
