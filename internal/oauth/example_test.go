package oauth_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/idemgate/idemgate/internal/oauth"
)

// A resource server serves its metadata at MetadataPath and answers a
// request without a valid token with 401 and Challenge. New contacts
// nobody, so this runs without the authorization server.
func ExampleVerifier() {
	v, err := oauth.New(context.Background(), &oauth.Config{
		Issuer:          "https://auth.example.com",
		Audience:        "https://api.example.com/mcp",
		TenantClaim:     "org_id",
		ScopesSupported: []string{"orders:read"},
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle(v.MetadataPath(), v.Metadata())

	fmt.Println(v.MetadataPath())
	fmt.Println(v.Challenge(nil))
	fmt.Println(v.Challenge(&oauth.TokenError{Reason: oauth.ReasonExpired, Detail: "the access token expired"}))
	// Output:
	// /.well-known/oauth-protected-resource/mcp
	// Bearer resource_metadata="https://api.example.com/.well-known/oauth-protected-resource/mcp", scope="orders:read"
	// Bearer resource_metadata="https://api.example.com/.well-known/oauth-protected-resource/mcp", scope="orders:read", error="invalid_token", error_description="the access token expired"
}
