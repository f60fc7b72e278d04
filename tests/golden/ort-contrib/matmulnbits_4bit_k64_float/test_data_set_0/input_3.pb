
Bzero_pointsJ(öC	$õBeşçBq‚CË_ğB{§C-ÅôB‘øCECüÜC