package api

import "testing"

func TestFastPathRunsOnlyWithTheCheckedSDKRelease(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{
		"":                                   true, // a build that does not say: tests
		"v1.8.0":                             true,
		"v1.8.3":                             true,
		"v1.9.0":                             false,
		"v1.80.0":                            false,
		"v2.0.0":                             false,
		"v0.0.0-20270101000000-abcdefabcdef": false,
	} {
		if got := sdkVerified(v); got != want {
			t.Errorf("sdkVerified(%q) = %v, want %v", v, got, want)
		}
	}
}
