By_scaleJ
×£<Âõ<ÍÌL=