Bscale_weightJ
×#<