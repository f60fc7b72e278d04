Binput_scaleJ
×#<