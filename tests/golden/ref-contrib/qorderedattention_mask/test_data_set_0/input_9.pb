Bscale_K_weightJ
ף<