package lb

// Eject releases b after a failed relay that is unambiguous (the connection
// was refused or timed out, so nothing reached the backend) and ejects it
// for the cooldown at once, whatever the consecutive-failure count, as
// nginx's max_fails=1 does. With passive checks off (Failures 0) it is a
// plain failed Release.
func (p *Pool) Eject(b *Backend) { p.release(b, false, true) }
