BY_scaleJ
×#=