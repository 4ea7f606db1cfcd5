#!/usr/bin/env bash
# Issue 41 on a real GPU machine (Ubuntu, NVIDIA's driver, no libmicrohttpd):
# the release binary serves /metrics with glibc alone, then over TLS with
# basic auth (the host's GnuTLS and libxcrypt, loaded for them), and doctor's
# metrics check agrees. usage: metrics_bare.sh GPULET OUTDIR
set -u
gpulet=$(realpath "$1") out=$2
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
say() { echo "$*"; }
check() { if eval "$2"; then say "PASS  $1"; else say "FAIL  $1"; fi; }

say "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); $(. /etc/os-release; echo "$PRETTY_NAME")"
say "gpulet's dynamic dependencies:"; ldd "$gpulet" | sed 's/^/  /'
check "no libmicrohttpd on this host" "! ldconfig -p | grep -q libmicrohttpd"
check "the binary needs glibc alone" "! ldd '$gpulet' | grep -vqE 'linux-vdso|libc.so|ld-linux'"

agent() { # PORT LOG [ARGS...]
    local port=$1 log=$2; shift 2
    "$gpulet" agent --kubelet-root "$tmp/k$port" --status-socket "$tmp/s$port.sock" \
        --metrics-listen "127.0.0.1:$port" "$@" >"$log" 2>&1 &
    for _ in $(seq 100); do grep -q "agent running" "$log" && return 0; sleep 0.1; done
    return 1
}

agent 19400 "$tmp/plain.log"
sleep 2
curl -s http://127.0.0.1:19400/metrics >"$tmp/plain.txt"
check "plain /metrics answers with the GPU's samples" "grep -q '^DCGM_FI_DEV_GPU_TEMP{' '$tmp/plain.txt'"
say "  $(grep -c '^DCGM_' "$tmp/plain.txt") DCGM samples; $(grep '^DCGM_FI_DEV_GPU_TEMP{' "$tmp/plain.txt" | head -1)"
say "  agent RSS: $(ps -o rss= -p "$(pgrep -f 'metrics-listen 127.0.0.1:19400')") KiB"

openssl req -x509 -newkey rsa:2048 -nodes -days 2 -keyout "$tmp/key.pem" -out "$tmp/cert.pem" \
    -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1
hash=$(python3 -c "import crypt; print(crypt.crypt('s3cret', crypt.mksalt(crypt.METHOD_BLOWFISH)))" 2>/dev/null)
printf 'tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\nbasic_auth_users:\n  prom: %s\n' "$hash" >"$tmp/web.yml"
check "a TLS agent starts (GnuTLS loaded)" "agent 19401 '$tmp/tls.log' --web-config-file '$tmp/web.yml'"
sleep 2
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$tmp/cert.pem" https://127.0.0.1:19401/metrics)
check "TLS without credentials: 401 ($code)" "[ '$code' = 401 ]"
curl -s --cacert "$tmp/cert.pem" -u prom:s3cret https://127.0.0.1:19401/metrics >"$tmp/tls.txt"
check "TLS with basic auth: the samples" "grep -q '^DCGM_FI_DEV_GPU_TEMP{' '$tmp/tls.txt'"
check "no plain HTTP on the TLS port" "! curl -s -m 3 http://127.0.0.1:19401/metrics | grep -q DCGM"
say "  GnuTLS the agent loaded: $(grep -o 'libgnutls[^ ]*' /proc/"$(pgrep -f 'metrics-listen 127.0.0.1:19401')"/maps | sort -u | head -1)"
"$gpulet" doctor --web-config-file "$tmp/web.yml" -o json >"$tmp/doctor.json" 2>&1
check "doctor: metrics PASS over TLS" "grep -A3 '\"metrics\"' '$tmp/doctor.json' | grep -q PASS"
say "  doctor: $(grep -A4 '\"id\": \"metrics\"' "$tmp/doctor.json" | grep message)"
cp "$tmp"/*.log "$out"/ 2>/dev/null
