#!/usr/bin/env bash
# Builds a minimal CoreDNS (only the bind, ready, errors, kubernetes plugins: cluster names,
# and no forwarding anywhere) through the Go module proxy; cached by version.
set -euo pipefail
source "$(dirname "$0")/common.sh"

[[ -x $COREDNS_BIN ]] && exit 0
work="$CACHE/coredns/$COREDNS_VERSION/mod"
mkdir -p "$work" && cd "$work"
cat >main.go <<'GO'
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

// The plugin chain order; anything not listed cannot be configured.
func init() { dnsserver.Directives = []string{"bind", "ready", "errors", "kubernetes"} }

func main() { coremain.Run() }
GO
printf 'module coordinated.dev/e2e-coredns\n\ngo 1.24\n' >go.mod
log "building coredns $COREDNS_VERSION"
go get "github.com/coredns/coredns@$COREDNS_VERSION"
go mod tidy
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$COREDNS_BIN.tmp" .
mv "$COREDNS_BIN.tmp" "$COREDNS_BIN"
