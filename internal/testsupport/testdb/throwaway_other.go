//go:build !unix

package testdb

import "errors"

func throwaway() (string, error) {
	return "", errors.New("starting a throwaway cluster is implemented on Unix only")
}
