BX_scaleJ
ף=