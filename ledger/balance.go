package ledger

// Balances returns the balance per counterparty over the whole ledger.
// Receipts, successions and disputes do not move balances.
func (db *DB) Balances() (map[string]Balance, error) {
	out := make(map[string]Balance)
	err := db.scan(Filter{}, func(e *Entry) error {
		if e.Kind == KindReceipt || e.Kind == KindSuccession || e.Kind == KindDispute {
			return nil
		}
		b := out[e.Counterparty]
		switch e.Kind {
		case KindPaymentOwed:
			b.Owed += e.Amount
		case KindPaymentEarned:
			b.Earned += e.Amount
		case KindPreemptionCredit:
			if e.Direction == DirCreditGranted {
				b.Credits -= e.Amount
			} else {
				b.Credits += e.Amount
			}
		}
		b.Net = b.Earned - b.Owed + b.Credits
		out[e.Counterparty] = b
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
