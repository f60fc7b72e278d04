By_scaleJ
×#<