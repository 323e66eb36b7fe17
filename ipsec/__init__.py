"""ipsec"""
