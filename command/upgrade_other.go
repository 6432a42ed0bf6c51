//go:build !linux

package command

import "errors"

func stateFile(b []byte) (int, error) { return -1, errors.New("an upgrade in place needs Linux") }
