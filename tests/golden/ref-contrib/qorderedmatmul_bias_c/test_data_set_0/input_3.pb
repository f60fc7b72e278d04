Bscale_BJ
ף<