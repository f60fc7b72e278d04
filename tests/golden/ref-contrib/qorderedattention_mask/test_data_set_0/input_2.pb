Bscale_Q_gemmJ
ף=