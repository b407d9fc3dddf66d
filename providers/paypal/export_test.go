package paypal

// SetSearchPageSize makes p's Totals read Transaction Search pages of n transactions, so that
// tests page without creating hundreds of them.
func SetSearchPageSize(p *Provider, n int) { p.pageSize = n }

// Classify maps a Client error as the Provider's methods do.
func (p *Provider) Classify(err error) error { return classify(err) }
