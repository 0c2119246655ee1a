//go:build !unix

package build

import "os/exec"

// ownGroup: without Unix process groups a cancelled build kills make alone.
func ownGroup(*exec.Cmd) {}

func killGroup(*exec.Cmd) error { return nil }
