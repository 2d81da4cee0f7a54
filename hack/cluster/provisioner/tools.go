//go:build tools

// Package tools pins the command that hack/cluster/tools.sh builds from this module.
package tools

import (
	_ "github.com/rancher/local-path-provisioner"
)
